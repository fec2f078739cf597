"""The bind verb: decide at arrival, write the claims (finalizer, allocation, reservation), wait for
template claims and binding conditions, bind the pod, roll back what a failure leaves."""
