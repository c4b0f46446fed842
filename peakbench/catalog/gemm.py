"""What a vendor GEMM library (cuBLASLt, hipBLASLt) reaches, beside the matrix units' peak."""

TESTS = ()
