package devicesdk

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// The queue format, version 1 (docs/sdk.md, "Queue format"): the C SDK
// writes and reads the same bytes.
const (
	metaMagic   = "DSQ1"
	stateMagic  = "DSS1"
	metaSize    = 32
	stateSize   = 40
	headerSize  = 16 // u32 length, u32 CRC-32C, u64 sequence number
	payloadHead = 32 // u8 time kind, 7 bytes 0, i64 time, 16 bytes boot id

	// MaxRecordBytes bounds one reading's payload on disk.
	MaxRecordBytes = 1 << 20
)

// Time kinds of a reading.
const (
	timeNone = 0 // sent without a time: stored at receive time
	timeWall = 1 // Unix milliseconds
	timeBoot = 2 // milliseconds since the boot named by the boot id
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errCorrupt = errors.New("devicesdk: queue file corrupt")

// meta is the queue's identity.
type meta struct{ id [16]byte }

func (m meta) encode() []byte {
	b := make([]byte, metaSize)
	copy(b, metaMagic)
	binary.LittleEndian.PutUint32(b[4:], 1)
	copy(b[8:24], m.id[:])
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
	return b
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) != metaSize || string(b[:4]) != metaMagic || binary.LittleEndian.Uint32(b[4:]) != 1 ||
		binary.LittleEndian.Uint32(b[28:]) != crc32.Checksum(b[:28], castagnoli) {
		return m, errCorrupt
	}
	copy(m.id[:], b[8:24])
	return m, nil
}

// state is where sending stands: the first reading not settled (and its
// offset in its segment), and the batch being sent, if one is.
type state struct {
	head, offset uint64
	batchFirst   uint64 // 0: none
	batchCount   uint32
}

func (s state) encode() []byte {
	b := make([]byte, stateSize)
	copy(b, stateMagic)
	binary.LittleEndian.PutUint64(b[4:], s.head)
	binary.LittleEndian.PutUint64(b[12:], s.offset)
	binary.LittleEndian.PutUint64(b[20:], s.batchFirst)
	binary.LittleEndian.PutUint32(b[28:], s.batchCount)
	binary.LittleEndian.PutUint32(b[36:], crc32.Checksum(b[:36], castagnoli))
	return b
}

func decodeState(b []byte) (state, error) {
	if len(b) != stateSize || string(b[:4]) != stateMagic ||
		binary.LittleEndian.Uint32(b[36:]) != crc32.Checksum(b[:36], castagnoli) {
		return state{}, errCorrupt
	}
	return state{head: binary.LittleEndian.Uint64(b[4:]), offset: binary.LittleEndian.Uint64(b[12:]),
		batchFirst: binary.LittleEndian.Uint64(b[20:]), batchCount: binary.LittleEndian.Uint32(b[28:])}, nil
}

// appendRecord appends the record of reading seq with payload p.
func appendRecord(dst []byte, seq uint64, p []byte) []byte {
	var h [headerSize]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(p)))
	binary.LittleEndian.PutUint64(h[8:], seq)
	crc := crc32.Update(0, castagnoli, h[8:16])
	binary.LittleEndian.PutUint32(h[4:], crc32.Update(crc, castagnoli, p))
	return append(append(dst, h[:]...), p...)
}

// recordAt reads the record at the start of b if it is whole, of reading
// want and intact: its payload and length on disk; ok false otherwise.
func recordAt(b []byte, want uint64) (p []byte, n int, ok bool) {
	if len(b) < headerSize {
		return nil, 0, false
	}
	size := binary.LittleEndian.Uint32(b[0:])
	if size > MaxRecordBytes || uint64(len(b)-headerSize) < uint64(size) || binary.LittleEndian.Uint64(b[8:]) != want {
		return nil, 0, false
	}
	p = b[headerSize : headerSize+int(size)]
	crc := crc32.Update(0, castagnoli, b[8:16])
	if binary.LittleEndian.Uint32(b[4:]) != crc32.Update(crc, castagnoli, p) {
		return nil, 0, false
	}
	return p, headerSize + int(size), true
}

// reading is a reading as the queue holds it.
type reading struct {
	seq  uint64
	kind byte
	time int64
	boot [16]byte
	data []byte // a JSON object
}

func appendPayload(dst []byte, r reading) []byte {
	var h [payloadHead]byte
	h[0] = r.kind
	binary.LittleEndian.PutUint64(h[8:], uint64(r.time))
	copy(h[16:], r.boot[:])
	return append(append(dst, h[:]...), r.data...)
}

func decodePayload(seq uint64, p []byte) (reading, bool) {
	if len(p) < payloadHead || p[0] > timeBoot {
		return reading{}, false
	}
	r := reading{seq: seq, kind: p[0], time: int64(binary.LittleEndian.Uint64(p[8:])), data: p[payloadHead:]}
	copy(r.boot[:], p[16:32])
	return r, true
}
