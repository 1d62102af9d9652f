"""The stack's composition: every service in one process, the embedded servers it starts when no
URLs are given, and the file where a running stack says where it is."""
