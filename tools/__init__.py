"""What the model can call: the vast.ai client, fleet and memory tools, the simulator."""
