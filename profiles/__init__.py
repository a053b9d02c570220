"""Starter profiles shipped with conduit (read by `conduit init`)."""
