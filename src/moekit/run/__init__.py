"""The run lifecycle: what happens between a composed, checked config and a recorded outcome.

- execute: `train(cfg) -> RunResult`, the seam every command uses: probes, run directory, processes (run/launch.py),
  signals, attempts and the resume loop, the failure report; `dry_run(cfg)` shows the same job without launching;
- records: the one owner of manifest.json, summary.json and job.json (typed objects, read and written there);
- preflight: host probes (run directory, rendezvous environment, ports, GPUs, TransformerEngine, the XLA flags
  and MaxText keys the installed stack accepts), the same for a real run and for --dry-run;
- attempts: reusing a run directory: the resume check, its lock, each attempt's outputs, merged metrics;
- checkpoints: setting aside a checkpoint that does not restore, so a resume falls back to an older one;
- view: the job as shown and recorded, secrets redacted, each piece with the config choice that set it;
- sweep: `moekit train -m` (one run per point of a Hydra sweep, then one report);
- trial: one `moekit train` as a child process with a time limit (tune, benchmarks);
- launch: the processes, their log pumps, passing a stop signal on, the stall watchdog's kill;
- preemption: a signal to moekit becomes a save at the next step and a `preempted` attempt (steps lost, time);
- watchdog: the stall bound (run.stall_timeout_s), the workers' stacks, the `hang` class;
- xla_flags: which XLA flags the installed jaxlib knows (asked once per jaxlib version, cached).
"""
