package a2a

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxEventBytes caps one server-sent event (all its data lines together).
const maxEventBytes = 8 << 20

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	ID    string
	Event string
	Data  []byte
}

// sseReader reads a text/event-stream. It accepts "data:" with or without
// the space after the colon, joins multi-line data with "\n", ignores
// comments (heartbeats), keeps "id:" and "event:", reads LF and CRLF line
// endings, and handles events of any size up to max bytes.
type sseReader struct {
	r     *bufio.Reader
	max   int
	id    string
	event string
	data  []byte
	has   bool // a data line was seen since the last dispatch
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next event with data. It returns io.EOF at the end of
// the stream; an event cut off by the end of the stream is discarded, as the
// SSE specification requires.
func (s *sseReader) Next() (sseEvent, error) {
	for {
		line, err := s.readLine()
		if err != nil {
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if !s.has {
				s.event = ""
				continue
			}
			ev := sseEvent{ID: s.id, Event: s.event, Data: s.data}
			s.event, s.data, s.has = "", nil, false
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if len(s.data)+len(value)+1 > s.max {
				return sseEvent{}, fmt.Errorf("%w: event larger than %d bytes", ErrBodyTooLarge, s.max)
			}
			if s.has {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			s.has = true
		case "event":
			s.event = string(value)
		case "id":
			if !bytes.ContainsRune(value, 0) {
				s.id = string(value)
			}
		}
	}
}

// readLine returns one line without its LF or CRLF ending, failing with
// ErrBodyTooLarge for a line longer than the event cap.
func (s *sseReader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		if len(line)+len(chunk) > s.max+2 {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrBodyTooLarge, s.max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			// A last line without a newline cannot complete an event.
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}
