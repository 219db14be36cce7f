"""Clients for the services fleet-agent talks to that are not tools the model calls: vast.ai and the demand queue."""
