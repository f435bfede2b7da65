"""Triton kernels and their launchers. No validation here: the ops check arguments first."""
