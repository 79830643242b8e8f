"""The performance-analysis agent: the precision-aware roofline, kernel kinds, rules by concern, ranking."""
