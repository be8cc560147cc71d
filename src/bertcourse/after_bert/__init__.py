"""What came after BERT (lesson 6): its objectives, models, distillation, generation, and the runner that trains them."""
