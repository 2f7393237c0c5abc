"""The vocabulary every layer speaks: request specs and state, plans, the policy
protocol, batch shapes and KV accounting. Imports nothing of chunksim above it."""
