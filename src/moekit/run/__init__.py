"""The run lifecycle: what happens between a composed, checked config and a recorded outcome.

- execute: `train(cfg) -> RunResult`, the seam every command uses: the corpus (prepare/), host probes (preflight/),
  then the run's setup and its attempts; `dry_run(cfg)` shows the same job without launching;
- setup: what every attempt shares: processes and coordinator port, the run directory (new, or one to resume);
- attempt: one attempt in its phases, and the attempts until one ends the run:
  before_launch (records written, processes' argv/env/logs), follow (the launch, followed: phases, progress, stop
  flag), verdict (how it ended), outcome (summary and manifest recorded, the outcome told);
- checkpoints: setting aside a checkpoint that does not restore, so a resume falls back to an older one;
- view: the job as shown and recorded, secrets redacted, each piece with the config choice that set it;
- launch: the processes, their log pumps, passing a stop signal on, the stall watchdog's kill;
- preemption: a signal to moekit becomes a save at the next step and a `preempted` attempt (steps lost, time);
- watchdog: the stall bound (run.stall_timeout_s), the workers' stacks, the `hang` class;
- compiling: the seconds of the compiling line.
"""
