"""A handler whose archive names a requirementsFile: it imports `tinydep`, a package that
is in no environment until the gateway installs the archive's requirements into the
model's own (install_py_dep_per_model=true)."""

import tinydep


def handle(data, context):
    if data is None:  # the initialize call
        return None
    return [f"tinydep {tinydep.VALUE}" for _ in data]
