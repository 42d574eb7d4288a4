"""Glue for training frameworks (see the README, "Use pride with ...")."""
