// Package chtest opens chstore Stores on the tests' ClickHouse server
// (integration/testenv), for the tests of the packages that use chstore.
package chtest

import (
	"context"
	"strings"
	"testing"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Open returns a Store on database db of the tests' ClickHouse server as
// user (ingest_writer, as deployed; default for benchmarks that generate
// their rows in ClickHouse), its schema migrated, closed when tb ends.
func Open(tb testing.TB, user, db string) *chstore.Store {
	tb.Helper()
	s, err := chstore.Open(chstore.Config{URL: "clickhouse://" + user + "@" + testenv.ClickHouseAddr(tb) + "/" + db})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return s
}

// OpenReplicated returns a Store on database db of a replicated test
// cluster (testenv.ReplicatedClickHouse) through addrs, with an insert
// quorum of 2, closed when tb ends; migrate it through every replica
// (Migrate creates the tables on each of the Store's addresses).
func OpenReplicated(tb testing.TB, db string, addrs ...string) *chstore.Store {
	tb.Helper()
	s, err := chstore.Open(chstore.Config{URL: "clickhouse://default@" + strings.Join(addrs, ",") + "/" + db + "?insert_quorum=2", Replicated: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}
