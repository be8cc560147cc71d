"""Training machinery: the commands pretrain, finetune, compare and evaluate, and what they share (the loop, packing, checkpoints, devices, processes)."""
