package recordtest

import (
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// FullRecord is an operation record with every field set, by reflection: a
// field added to events.OpRecord is in it without anyone remembering, so a
// hand-written coder that does not know it fails the tests built on it. It
// errs on a field of a kind it cannot set.
func FullRecord() (events.OpRecord, error) {
	var rec events.OpRecord
	v := reflect.ValueOf(&rec).Elem()
	now := time.Date(2026, 12, 1, 18, 0, 0, 5, time.UTC)
	for i := range v.NumField() {
		f := v.Field(i)
		switch p := f.Addr().Interface().(type) {
		case *time.Time:
			*p = now
		case **time.Time:
			*p = &now
		case **int:
			n := 3
			*p = &n
		case *map[string]string:
			*p = map[string]string{"k": "v"}
		default:
			switch f.Kind() {
			case reflect.String:
				f.SetString("x" + strconv.Itoa(i))
			case reflect.Int, reflect.Int64:
				f.SetInt(int64(i + 1))
			case reflect.Bool:
				f.SetBool(true)
			default:
				return rec, fmt.Errorf("events.OpRecord.%s: a %s, which FullRecord cannot set", v.Type().Field(i).Name, f.Type())
			}
		}
	}
	return rec, nil
}
