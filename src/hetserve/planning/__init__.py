"""Control plane: one module per planning method, all returning core Plan objects."""
