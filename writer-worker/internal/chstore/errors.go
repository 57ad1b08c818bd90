package chstore

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/devicehub/eventservice/pkg/failure"
)

// permanentCodes are the ClickHouse exceptions that fail the same way every
// time for the same data and schema: the table refused what was sent. Every
// other failure (connection, timeout, memory, too many parts, read-only
// replica, quorum not reached, and a table or database that is missing while
// an operator restores it) is transient and retried within the delivery
// limit.
var permanentCodes = map[int32]string{
	6:   "CANNOT_PARSE_TEXT",
	16:  "NO_SUCH_COLUMN_IN_TABLE",
	20:  "NUMBER_OF_COLUMNS_DOESNT_MATCH",
	26:  "CANNOT_PARSE_QUOTED_STRING",
	27:  "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
	33:  "CANNOT_READ_ALL_DATA",
	41:  "CANNOT_PARSE_DATETIME",
	44:  "ILLEGAL_COLUMN",
	47:  "UNKNOWN_IDENTIFIER",
	53:  "TYPE_MISMATCH",
	62:  "SYNTAX_ERROR",
	69:  "ARGUMENT_OUT_OF_BOUND",
	70:  "CANNOT_CONVERT_TYPE",
	72:  "CANNOT_PARSE_NUMBER",
	117: "INCORRECT_DATA",
	131: "TOO_LARGE_STRING_SIZE",
	321: "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
}

// classify marks err permanent when ClickHouse answered with one of the
// permanent exception codes; anything else stays transient.
func classify(err error) error {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		if _, ok := permanentCodes[ex.Code]; ok {
			return failure.AsPermanent(err)
		}
	}
	return err
}

// DiskFull reports whether err is ClickHouse's disk being full: no space to
// reserve for a part (NOT_ENOUGH_SPACE), or a write that found none. Such a
// failure is transient: the insert is retried, and succeeds once space is
// freed.
func DiskFull(err error) bool {
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return false
	}
	return ex.Code == 243 || strings.Contains(ex.Message, "No space left on device") || strings.Contains(ex.Message, "Cannot reserve")
}

// Condition names what failed in err for an answer that leaves the
// network (a device's 503): no address, table or server text.
func Condition(err error) string {
	var ex *clickhouse.Exception
	var ne net.Error
	switch {
	case DiskFull(err):
		return "storage full"
	case failure.KindOf(err) == failure.Permanent:
		return "data refused by storage"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "storage timed out"
	case errors.As(err, &ex):
		return "insert failed"
	}
	return "storage unreachable"
}
