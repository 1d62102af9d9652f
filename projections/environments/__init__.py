"""The environments projection: each environment's last published state."""
