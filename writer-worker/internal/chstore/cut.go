package chstore

import (
	"encoding/json"
	"strconv"

	"github.com/devicehub/eventservice/pkg/query"
)

// Reads are bounded by bytes (query.Budget) as well as rows: a page of
// points stops where its values fill the budget, chosen from the values'
// sizes before any value is read; where a fixed number of values is
// answered (latest values, buckets' last values), each has an even share
// and one over it is left out, named by its size.

// capped selects expr (a String) where it is at most n bytes long, else
// the empty string, and its length; scan both with cutValue.
func capped(expr string, n int) string {
	return "if(length(" + expr + " AS capped_v) <= " + strconv.Itoa(n) + ", capped_v, ''), length(capped_v)"
}

// cutValue is a value selected by capped and its length: the value, or
// nil and its size when it was left out.
func cutValue(v string, n uint64) (json.RawMessage, int) {
	if v == "" && n > 0 {
		return nil, int(n)
	}
	return json.RawMessage(v), 0
}

// share is each of n values' part of budget (at least one row's worth).
func share(budget int, n int64) int {
	return int(max(int64(budget)/max(n, 1)-query.RowBytes, query.RowBytes))
}

// pageCut chooses a page of points in reading-time order from their
// reading times (ms) and sizes, given one past the limit when more
// follow: the rows that fit in limit and budget, and the FromMs of the
// page after (0: none). A page ends between two milliseconds, so that
// the page after starts where it stopped; when the first millisecond
// alone is over the budget, the page holds what fits of it and the page
// after starts at the next millisecond.
func pageCut(ms []int64, size []int, limit, budget int) (rows int, nextMs int64) {
	used := 0
	for rows < len(ms) {
		if rows == limit || rows > 0 && used+size[rows]+query.RowBytes > budget {
			break
		}
		used += size[rows] + query.RowBytes
		rows++
	}
	if rows == len(ms) {
		return rows, 0
	}
	next := ms[rows]
	whole := rows
	for whole > 0 && ms[whole-1] == next {
		whole--
	}
	if whole == 0 {
		return rows, next + 1
	}
	return whole, next
}
