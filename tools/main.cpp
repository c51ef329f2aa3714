// fp4gemm CLI entry point (placeholder).
int main() { return 0; }
