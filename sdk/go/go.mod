module github.com/devicehub/eventservice/sdk/go

go 1.22
