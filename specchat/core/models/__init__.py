"""specchat.core.models"""
