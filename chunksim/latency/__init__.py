"""The latency model: a profile table in, the seconds a step costs out."""
