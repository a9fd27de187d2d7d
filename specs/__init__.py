"""Declarative kernel specs. Each module lists its spec objects in ``SPECS``.

Data only: the classes live in ``codegen``; `codegen regenerate` turns these into ``generated/``.
"""
