"""Models in: `add` and `add_torch`, and what a model's bindings came from.

- `importing.py`: `NAME.add(...)` and `NAME.add_torch(model, args)`;
- `input_writes.py`: the inputs a model writes into (`x.add_(1)`), written as PyTorch does;
- `model_repairs.py`, `torch_fallback.py`, `mistranslations.py`: what TVM's importer gets wrong
  or cannot translate;
- `source_sites.py`: where a binding came from in the model's code;
- `import_failures.py`, `dynamic_shapes.py`: why a model could not come in, and sizes that
  are dynamic or that the data decides;
- `torch_source.py`: `NAME.as_torch("fn")`.
"""
