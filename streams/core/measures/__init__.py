"""The home of end-to-end measures: pure folds over a workspace's envelopes (rule outcomes,
time to resolution, judge agreement with people, proposal rates), run offline as reports and
experiments with the same engine the workers run. Each measure is a function of envelopes;
readers in the runtime feed it a tenant's log. Nothing is measured here yet."""
