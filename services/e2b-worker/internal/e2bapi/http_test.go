package e2bapi_test

import "net/http"

func httpGet(u string) (int, error) {
	resp, err := http.Get(u)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
