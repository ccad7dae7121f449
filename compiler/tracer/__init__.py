"""The bytecode tracer: CPython frames to FX graphs, guards and graph breaks."""
