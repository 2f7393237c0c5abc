"""The Llama-style decoder in PyTorch that `sim profile` times and the live loop
serves: shapes, KV pools, attention, one mixed step, devices."""
