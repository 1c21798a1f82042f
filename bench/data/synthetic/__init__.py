"""Embedded synthetic datasets: procedural renderers of faces, persons, objects and scenes."""
