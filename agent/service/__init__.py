"""The agent's gRPC service and the state behind it: handlers (server.py), authentication,
the device lease, identity proof, Info, the state-directory lock, the artifact store and
its write-behind uploads. Imports no runtime."""
