package httpapi

// GuardCSVCell exposes the CSV formula-injection guard to the tests.
var GuardCSVCell = csvText
