"""What a run records: the step and request rows (`records`), latency samples
(`quantiles`), rejected requests (`rejections`) and how a run's rows are written
(`outputs`). Empty on purpose: importing the package imports none of its modules."""
