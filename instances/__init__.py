"""Named instances shipped with optsched (installed as ``optsched.data_instances``)."""
