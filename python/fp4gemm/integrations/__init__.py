"""fp4gemm inside other libraries (each submodule imports its library only when called)."""
