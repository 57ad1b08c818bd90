package chstore_test

import (
	"encoding/xml"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// The ClickHouse users deploy/ ships (compose mounts them; Kubernetes
// servers are given them) accept connections from private networks only,
// and compose's "default" user, which has no password, from loopback only.
func TestShippedClickHouseUsersAreNotOpenToAnyNetwork(t *testing.T) {
	for file, users := range map[string][]string{
		"../../../deploy/clickhouse/users.xml":        {"ingest_writer", "ingest_reader"},
		"../../../deploy/clickhouse/default-user.xml": {"default"},
	} {
		for _, user := range users {
			nets := networks(t, file, user)
			if len(nets) == 0 {
				t.Errorf("%s: %s has no networks (any address may connect)", file, user)
			}
			for _, n := range nets {
				p, err := netip.ParsePrefix(n)
				if err != nil {
					a, aerr := netip.ParseAddr(n)
					if aerr != nil {
						t.Fatalf("%s: %s: network %q: %v", file, user, n, err)
					}
					p = netip.PrefixFrom(a, a.BitLen())
				}
				a := p.Addr()
				if !(a.IsLoopback() || a.IsPrivate()) || p.Bits() < 8 || user == "default" && !a.IsLoopback() {
					t.Errorf("%s: %s accepts connections from %s", file, user, n)
				}
			}
		}
	}
	compose, err := os.ReadFile("../../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), "deploy/clickhouse/default-user.xml:/etc/clickhouse-server/users.d/") {
		t.Error("docker-compose.yml does not mount deploy/clickhouse/default-user.xml")
	}
}

// Compose's server fsyncs every insert before acknowledging it: the
// writer answers stored once ClickHouse acknowledged, and without the
// fsync a power cut loses the inserts of the last ~30 s
// (integration.TestPartitionClickHouseLosesPower).
func TestComposeClickHouseSyncsInserts(t *testing.T) {
	b, err := os.ReadFile("../../../deploy/clickhouse/durability.xml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName   xml.Name
		MergeTree struct {
			AfterInsert   string `xml:"fsync_after_insert"`
			PartDirectory string `xml:"fsync_part_directory"`
		} `xml:"merge_tree"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("durability.xml: %v", err)
	}
	if doc.XMLName.Local != "clickhouse" || doc.MergeTree.AfterInsert != "1" || doc.MergeTree.PartDirectory != "1" {
		t.Errorf("durability.xml: root %q, fsync_after_insert %q, fsync_part_directory %q; want clickhouse, 1, 1",
			doc.XMLName.Local, doc.MergeTree.AfterInsert, doc.MergeTree.PartDirectory)
	}
	compose, err := os.ReadFile("../../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), "deploy/clickhouse/durability.xml:/etc/clickhouse-server/config.d/") {
		t.Error("docker-compose.yml does not mount deploy/clickhouse/durability.xml into the server's config.d")
	}
}

// networks are the <ip> entries of user in a users file.
func networks(t *testing.T, file, user string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Users struct {
			Any []struct {
				XMLName xml.Name
				IPs     []string `xml:"networks>ip"`
			} `xml:",any"`
		} `xml:"users"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, u := range doc.Users.Any {
		if u.XMLName.Local == user {
			return u.IPs
		}
	}
	t.Fatalf("%s has no user %s", file, user)
	return nil
}
