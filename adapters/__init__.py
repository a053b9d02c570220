"""conduit.adapters: one module per tool, plus the shared settings object and safe writer."""
