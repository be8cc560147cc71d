"""Training machinery: the commands pretrain, finetune, compare and evaluate, and what they share.

The loop's pieces (packing, objectives, checkpoints, devices, processes, FLOPs) sit here beside the commands;
the teaching modules one folder up never import from here.
"""
