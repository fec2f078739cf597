"""Read models between the state and the server: what the debug endpoints, ``why``, the device map
and the object listing show. They read the service's state and change nothing."""
