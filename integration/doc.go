// Package integration holds the end-to-end tests: the three programs built and run as
// separate processes against an in-process NATS JetStream server and the
// ClickHouse server that `make test` starts, driven over HTTP like a device.
package integration
