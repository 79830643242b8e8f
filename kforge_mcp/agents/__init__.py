"""The generation side of KForge: prompts, code extraction from LLM replies, the loop driver and LLM providers."""
