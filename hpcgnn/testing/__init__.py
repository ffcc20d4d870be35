"""What the test suite shares and the runtime never imports: reference kernels (oracles),
small generated graphs, and datasets partitioned from them."""
