"""Batching: static (padded batch, runs until its longest row ends) against in-flight (iteration-level
scheduling: requests join and leave the running batch at every decode step), both real and measured.

Modules: kv (prefill, decode step, padded-cache surgery), sequence (one request's decoding state),
static (the static runner), scheduler (the shared in-flight Scheduler), handle (a request's RequestHandle and
the scheduler's snapshot views),
workload (request generator, replay under a policy, percentiles and timelines), sweep (static batch sizes).
"""
