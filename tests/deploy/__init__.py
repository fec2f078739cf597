"""Tests of the deployment artifacts: deploy/ manifests, the Dockerfile, the scheduler configuration."""
