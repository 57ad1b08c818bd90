package bus

import (
	"fmt"
	"slices"
	"strings"
)

// User is one NATS user of a deployment: a program, or the operator, with
// the subjects it may publish and subscribe to (nothing else). Its
// password comes from the environment variable PasswordEnv of the NATS
// server, and of the program (as NATS_PASSWORD).
type User struct {
	Name        string
	PasswordEnv string
	Publish     []string
	Subscribe   []string
	// Responds lets the user answer requests it received (once each, to
	// the requester's inbox), without a right to publish there otherwise.
	Responds bool
}

// Inbox is the inbox prefix of a program's connection: its replies arrive
// under it, and its user may subscribe there only.
func Inbox(program string) string { return "_INBOX." + program }

// Users are the users of a deployment with names n, least privilege each (docs/guarantees.md, "Hostile input"):
// only ingest-api publishes events, writes the registry, holds the admin
// keys and the audit trail, and replays dead letters (for operators, so
// it may also publish to the mapped stream); the workers
// consume their own durable consumer, read the registry (the mapper) and
// answer (writer-worker also follows the claims log, as ingest-api does, and
// releases the claims of the events it drops); both ingest-api and writer-worker write the backfill jobs (one
// creates and cancels them, the other runs them). A program creates a
// missing stream or bucket but may not update, purge or delete one: limits
// are set once (ensure.go), and an audit trail the audited program could
// shorten would be none. The operator (the dead-letters tool, the nats
// CLI) may do anything.
func Users(n Names) []User {
	work := []string{n.EventsStream, n.MappedStream, n.DeadLetterStream, n.ClaimsStream, n.DiagStream}
	streams := []string{"$JS.API.INFO"} // every program ensures the shared streams at start
	for _, s := range work {
		streams = append(streams, "$JS.API.STREAM.CREATE."+s, "$JS.API.STREAM.INFO."+s)
	}
	// readKV follows a KV bucket (a watch) and reads its entries.
	readKV := func(bucket string) []string {
		kv := "KV_" + bucket
		return []string{
			"$JS.API.STREAM.INFO." + kv,
			"$JS.API.CONSUMER.CREATE." + kv + ".>", // the watch's ordered consumer
			"$JS.API.CONSUMER.DELETE." + kv + ".>",
			"$JS.FC." + kv + ".>", // its flow control
			"$JS.API.DIRECT.GET." + kv + ".>",
			"$JS.API.STREAM.MSG.GET." + kv,
		}
	}
	// writeKV also creates the bucket and writes it.
	writeKV := func(bucket string) []string {
		return append(readKV(bucket), "$JS.API.STREAM.CREATE.KV_"+bucket, "$KV."+bucket+".>")
	}
	readRegistry := readKV(n.RegistryBucket)
	audit, dead := n.AuditStream, n.DeadLetterStream
	consume := func(stream, consumer string) []string {
		return []string{
			"$JS.API.CONSUMER.CREATE." + stream + "." + consumer,
			"$JS.API.CONSUMER.CREATE." + stream + "." + consumer + ".>",
			"$JS.API.CONSUMER.DURABLE.CREATE." + stream + "." + consumer,
			"$JS.API.CONSUMER.INFO." + stream + "." + consumer,
			// created again when found ahead of its stream (ConsumeBatches)
			"$JS.API.CONSUMER.DELETE." + stream + "." + consumer,
			"$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer,
			"$JS.ACK." + stream + "." + consumer + ".>",
		}
	}
	// follow reads a stream through an ordered consumer (every ingest-api
	// copy follows the claims log, and writer-worker's filter of keys seen
	// too).
	follow := func(stream string) []string {
		return []string{
			"$JS.API.CONSUMER.CREATE." + stream + ".>",
			"$JS.API.CONSUMER.DELETE." + stream + ".>",
			"$JS.API.CONSUMER.INFO." + stream + ".>",
			"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		}
	}
	return []User{
		{Name: "ingest-api", PasswordEnv: "NATS_INGEST_PASSWORD",
			Publish: slices.Concat(streams, writeKV(n.RegistryBucket), writeKV(n.KeysBucket), writeKV(n.BackfillBucket), writeKV(n.CensusBucket), follow(n.ClaimsStream), []string{
				n.EventsSubject(), n.ClaimSubject("*"), n.QueryPrefix() + "*", n.RateSubject(), n.DiagSubject(),
				// Copies of the release before (until 2026-11-29) release a
				// claim by deleting it and read one whose answer was lost:
				// kept for a rolling upgrade, to be dropped in the next.
				"$JS.API.STREAM.MSG.DELETE." + n.ClaimsStream,
				"$JS.API.STREAM.MSG.GET." + n.ClaimsStream, "$JS.API.DIRECT.GET." + n.ClaimsStream, "$JS.API.DIRECT.GET." + n.ClaimsStream + ".>",
				n.AuditSubject(), "$JS.API.STREAM.CREATE." + audit, "$JS.API.STREAM.INFO." + audit,
				"$JS.API.STREAM.MSG.GET." + audit, "$JS.API.DIRECT.GET." + audit, "$JS.API.DIRECT.GET." + audit + ".>",
				// The workspace API's dead letters: read them, send them
				// back where they came from (the mapped stream included),
				// delete what was replayed.
				n.MappedSubject(), "$JS.API.STREAM.MSG.GET." + dead, "$JS.API.DIRECT.GET." + dead, "$JS.API.DIRECT.GET." + dead + ".>",
				"$JS.API.STREAM.MSG.DELETE." + dead,
			}),
			Subscribe: []string{n.ReplyPrefix() + ">", n.RateSubject(), Inbox("ingest-api") + ".>"}},
		{Name: "mapper-worker", PasswordEnv: "NATS_MAPPER_PASSWORD",
			Publish: slices.Concat(streams, readRegistry, consume(n.EventsStream, n.MapperConsumer), []string{
				n.MappedSubject(), n.DeadLetterSubject(), n.ReplyPrefix() + "*", n.DiagSubject(),
			}),
			Subscribe: []string{Inbox("mapper-worker") + ".>"}},
		{Name: "writer-worker", PasswordEnv: "NATS_WRITER_PASSWORD",
			Publish: slices.Concat(streams, consume(n.MappedStream, n.WriterConsumer), consume(n.DiagStream, n.DiagConsumer), follow(n.ClaimsStream), writeKV(n.BackfillBucket), []string{
				n.DeadLetterSubject(), n.ReplyPrefix() + "*",
				// The releases of the claims whose events it drops
				// (<prefix>.claims.free-<tag>), and the check that the
				// log was not numbered again (pkg/claimlog). A wildcard
				// cannot be narrower than a token: the writer may also
				// write entries and whole releases, so a writer's NATS
				// password is worth what ingest-api's is to the claims.
				n.ClaimSubject("*"),
				"$JS.API.STREAM.MSG.GET." + n.ClaimsStream, "$JS.API.DIRECT.GET." + n.ClaimsStream, "$JS.API.DIRECT.GET." + n.ClaimsStream + ".>",
			}),
			Subscribe: []string{n.QueryPrefix() + "*", Inbox("writer-worker") + ".>"}, Responds: true},
		{Name: "operator", PasswordEnv: "NATS_OPERATOR_PASSWORD", Publish: []string{">"}, Subscribe: []string{">"}},
	}
}

// AuthConf renders users as a nats-server configuration block.
func AuthConf(users []User) string {
	var b strings.Builder
	b.WriteString("# Generated from pkg/bus/permissions.go (TestAuthConfIsGenerated keeps it so):\n")
	b.WriteString("# one user per program, least privilege, passwords from the server's environment.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, u := range users {
		fmt.Fprintf(&b, "    {\n      user: %q\n      password: $%s\n      permissions: {\n", u.Name, u.PasswordEnv)
		fmt.Fprintf(&b, "        publish: { allow: %s }\n", quoteAll(u.Publish))
		fmt.Fprintf(&b, "        subscribe: { allow: %s }\n", quoteAll(u.Subscribe))
		if u.Responds {
			b.WriteString("        allow_responses: { max: 1, expires: \"1m\" }\n")
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
