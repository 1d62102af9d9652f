"""The hooks projection: saved webhooks and their deliveries."""
