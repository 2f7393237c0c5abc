"""Many replicas behind a router: the fleet (`fleet`), its knobs (`config`), its
records (`records`), prefill/decode disaggregation (`pd`) and the routers (`routers`); a
fleet run is `sim.fleet_run`. Empty on purpose: importing the package imports none of its
modules."""
