"""The build worker: a child process, kept warm, that builds what could crash this one.

TVM can end the process that builds: a segfault in a pass or in the PyTorch
importer, an abort, LLVM's fatal error while it generates code. In a
notebook that process is the kernel, and every variable goes with it. A
build worker runs such steps in a child process instead; when the child dies,
the caller gets `WorkerCrash` (the signal, the stage, LLVM's last words) and
the next job finds a fresh child. One machinery serves `--isolate` (imports
and compiles of a live module) and `bisect` (builds with passes switched
off, run on the same inputs); faults/isolation.py is the caller's side
(`WorkerBuilder`).

- `process.py`: `BuildWorker` (one child, its channel, its folder, its death)
  and `shared_worker()`, the one every live module of the process shares;
- `child.py`: the child's loop and the channel's messages (standard library
  only: a child that only dies imports nothing else);
- `jobs.py`: what the child does, the one job set;
- `pass_log.py`: every pass of a build, as stages, switched off on request.
"""
