"""Tests that start no server: pure functions, files and documents."""
