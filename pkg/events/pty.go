package events

// OpResize changes the window size of a process started with tty.
const OpResize = "resize"

// ResizeRequest is sbx.api.v1.resize.
type ResizeRequest struct {
	SandboxID string `json:"sandbox_id"`
	ProcessID string `json:"process_id"`
	Rows      int    `json:"rows"`
	Cols      int    `json:"cols"`
}

// MaxWindow bounds a terminal's rows and columns.
const MaxWindow = 1000

// Validate checks a resize request.
func (r *ResizeRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkID("process_id", r.ProcessID, true); e != nil {
		return e
	}
	if r.Rows < 1 || r.Rows > MaxWindow {
		return invalid("rows", "rows %d is not 1..%d", r.Rows, MaxWindow)
	}
	if r.Cols < 1 || r.Cols > MaxWindow {
		return invalid("cols", "cols %d is not 1..%d", r.Cols, MaxWindow)
	}
	return nil
}
