"""Many replicas behind a router: the fleet (`fleet`, `fleet_config`), its records
(`fleet_records`), one fleet run (`fleet_run`), prefill/decode disaggregation (`pd`) and
the routers (`routers`). Empty on purpose: importing the package imports none of its
modules."""
