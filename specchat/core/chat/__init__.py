"""specchat.core.chat"""
