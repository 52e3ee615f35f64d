"""Training loops (layer 5). Each reads like the algorithm box of its paper."""
