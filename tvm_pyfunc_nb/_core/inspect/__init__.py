"""Looking inside a run: features of the module's parts that read, never change, the module.

- `tracing.py`: `trace`; `comparing.py`, `kernel_compare.py`: `compare`, by binding or kernel;
  `replaying.py`: each binding run on the reference's values of its inputs, for `compare`;
- `profiling.py`: `profile`; `timing.py`: `time`;
- `lowered_views.py`: `lowered`, `kernels`, `source`;
- `graph.py`: `graph`, the function as nodes, edges and groups; `graph_marks.py`: what an
  overlay (compare, profile, trace) says of each node.
"""
