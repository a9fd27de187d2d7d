"""Declarative kernel-spec code generator: specs/ → codegen → generated/."""

__version__ = "0.1.0"
