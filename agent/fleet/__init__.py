"""The fleet's side effects and the rules they obey: policy, steering, spend, the tool pipeline, recovery."""
