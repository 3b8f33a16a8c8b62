"""Cost-model profiles shipped with optsched (installed as ``optsched.data_models``)."""
